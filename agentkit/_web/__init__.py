"""The SSE app's machinery (`agentkit.web` is its public face): the feed, the app, the watch page's files."""
