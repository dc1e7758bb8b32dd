"""The files here are checked by mypy only (``assert_type``); pytest never collects them."""

collect_ignore_glob = ["*.py"]
