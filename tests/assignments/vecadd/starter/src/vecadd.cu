// out[i] = a[i] + b[i] for i < n: the whole of this test-only assignment.
extern "C" void vec_add(const float* a, const float* b, float* out, int n) {
    // BEGIN SOLUTION: vec_add
    for (int i = 0; i < n; ++i) {
        out[i] = a[i] + b[i];
    }
    // END SOLUTION
}
