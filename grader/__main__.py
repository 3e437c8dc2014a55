"""`python -m grader`: the `grader` command (grader.cli); `grader worker --gpus` starts each GPU's worker so."""
from grader.cli.main import app

if __name__ == "__main__":
    app(prog_name="grader")
