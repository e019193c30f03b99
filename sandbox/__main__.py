"""``python -m sandbox serve ...``."""

from sandbox.cli import app

if __name__ == "__main__":
    app(prog_name="python -m sandbox")
