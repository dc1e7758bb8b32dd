"""AgentDojo prompt-injection harness: agentkit's tiers and provenance policy against a compromised executor.

``python -m benchmarks.injection [--suite NAME]`` from the benchmark's own venv
(``benchmarks/injection/setup.sh``); see ``benchmarks/README.md``. The modules other than ``dojo``
and ``run`` import no ``agentdojo``, so the project's tests check them in the normal venv.
"""
