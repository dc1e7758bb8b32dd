"""``python -m agentkit``."""

from agentkit.cli import run

if __name__ == "__main__":
    run()
