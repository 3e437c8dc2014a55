"""The class similarity check: fingerprints per file and function (prints, units, cache), the
comparison of every pair (compare), the base it is computed against (base), the stored report
(store, report) and the background job that computes it (jobs)."""
