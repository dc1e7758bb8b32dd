"""Model providers. Each is a leaf imported by name (``agentkit.providers.openai``), never by the core."""
