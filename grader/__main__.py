"""`python -m grader`: the `grader` command (grader.cli), e.g. for the GPU workers of `grader worker --gpus`."""
from grader.cli import app

app(prog_name="grader")
