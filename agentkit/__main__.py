"""`python -m agentkit`."""

from agentkit._cli import run

if __name__ == "__main__":
    run()
