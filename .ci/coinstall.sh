#!/usr/bin/env bash
# CI: agentkit installs next to what users already run. In a fresh venv (in /tmp): the newest openai,
# pydantic-ai-slim[openai] and openai-agents first, then agentkit with the test tools and its `anthropic` extra
# (the provider contract tests run on both callers); `pip check` must be clean and none of the three may have
# moved. Then a loop through OpenAICaller against FakeOpenAIServer, and the provider tests, run there on the
# newest openai. A second venv
# with the `instructor` extra (which holds openai at 3.3.0, the floor) runs the InstructorCaller tests
# and the provider tests again on that openai. Fails on the first thing that does not hold.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=$(mktemp -d /tmp/agentkit-coinstall.XXXXXX)
trap 'rm -rf "$work"' EXIT
peers=(openai pydantic-ai-slim openai-agents)
tests=(tests/providers/test_openai.py tests/providers/test_contract.py tests/providers/test_anthropic.py
       tests/providers/test_send.py tests/providers/test_wire.py tests/providers/test_strict.py tests/providers/test_golden.py
       tests/testing/test_fake_server.py tests/testing/test_fake_anthropic.py tests/package/test_private_names.py)
test_tools=("pytest>=9" "pytest-asyncio>=1.3" "pytest-xdist>=3.6" "hypothesis>=6.150" "jsonschema>=4.20")

versions() { "$1/bin/python" - "${peers[@]}" <<'PY'
import importlib.metadata as m, sys
print(" ".join(f"{name}=={m.version(name)}" for name in sys.argv[1:]))
PY
}

python3 -m venv "$work/peers"
"$work/peers/bin/pip" install -q --upgrade pip
"$work/peers/bin/pip" install -q openai 'pydantic-ai-slim[openai]' openai-agents
before=$(versions "$work/peers")
"$work/peers/bin/pip" install -q "$root[anthropic]" "${test_tools[@]}"
after=$(versions "$work/peers")
echo "coinstall: before agentkit: $before"
echo "coinstall: after agentkit:  $after"
[ "$before" = "$after" ] || { echo "coinstall: installing agentkit moved a peer's version" >&2; exit 1; }
"$work/peers/bin/pip" check
# the peers still import, and agentkit's import pulls in neither openai nor instructor
"$work/peers/bin/python" -c 'import pydantic_ai.models.openai, agents, agentkit'
(cd "$work" && "$work/peers/bin/python" - <<'PY'
import asyncio

from pydantic import BaseModel

from agentkit import LoopConfig, Outcome, Prompt, RetryPolicy, RoleSpec, ToolRoundInfo, Tier, run_tool_loop, tool
from agentkit.providers.openai import OpenAICaller
from agentkit.testing import FakeOpenAIServer, call_step, done_step


class Query(BaseModel):
    query: str


@tool(tier=Tier.READ_ONLY)
def search(args: Query) -> list[str]:
    """Search the corpus."""
    return [f"doc:{args.query}"]


class Searcher:
    def role(self) -> RoleSpec:
        return RoleSpec(model="m")

    def render(self, ctx: str, info: ToolRoundInfo[str]) -> Prompt:
        return Prompt(system="You search.", dynamic=f"{ctx}; seen {info.prior_results}")


async def main() -> None:
    with FakeOpenAIServer([call_step(Query(query="otters")), done_step("enough")]) as server:
        async with OpenAICaller(base_url=server.base_url) as caller:
            result = await run_tool_loop(caller, Searcher(), search, "find otters", LoopConfig(retry=RetryPolicy(wait_initial=0, wait_max=0)))
    assert result.outcome is Outcome.APPLIED and result.items == ["doc:otters"], result
    print("coinstall: a loop through OpenAICaller ran:", result.outcome, result.items)


asyncio.run(main())
PY
)
# the provider tests, from the checkout (they import tests.support), on the venv's openai and peers
(cd "$root" && "$work/peers/bin/python" -m pytest -q -p no:cacheprovider "${tests[@]}")

python3 -m venv "$work/instructor"
"$work/instructor/bin/pip" install -q --upgrade pip
"$work/instructor/bin/pip" install -q "$root[instructor,anthropic]" "${test_tools[@]}"
"$work/instructor/bin/pip" check
"$work/instructor/bin/python" -c 'import importlib.metadata as m
print("coinstall: with the instructor extra:", *(f"{n}=={m.version(n)}" for n in ("openai", "instructor", "jiter")))'
(cd "$root" && "$work/instructor/bin/python" -m pytest -q -p no:cacheprovider \
    tests/providers/test_instructor.py "${tests[@]}")
