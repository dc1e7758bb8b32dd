"""`agentkit inbox`: a web page over a journal's inbox (extra `inbox`).

Reviewers see pending proposals (tool, tier, args, rationale, run, history) and approve them,
reject them, or amend their args and approve; the page follows changes made elsewhere. Nothing
here is imported by `import agentkit`: the command line imports it when `agentkit inbox` runs.
See "A web inbox" in `docs/human-in-the-loop.md`.
"""
