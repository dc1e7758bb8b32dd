"""The demo: a retrieval agent over a bundled corpus, then a tiered planning example.

Run it with `agentkit demo` (the embedded local model), `agentkit demo --scripted` (no model),
or `agentkit demo --base-url URL --model NAME` (any OpenAI-compatible server).
"""
