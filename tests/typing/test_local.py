"""assert_type checks for agentkit.providers.local and the demo's public entry points (mypy only)."""

from __future__ import annotations

from pathlib import Path
from typing import assert_type

from agentkit._demo.agent import DeleteArgs, GroundedAnswer, delete_tool
from agentkit._demo.search import BM25Index, Hit, SearchArgs, load_corpus, search_tool
from agentkit._structured import StructuredCaller
from agentkit._tools import FunctionTool
from agentkit.providers import local as lm
from agentkit.providers.openai import OpenAICaller


def check_local() -> None:
    assert_type(lm.DEFAULT_MODEL, lm.ChunkedModel)
    assert_type(lm.ensure_model_file(lm.DEFAULT_MODEL, cache_dir="/tmp/x"), Path)
    assert_type(lm.locate_chunks(lm.DEFAULT_MODEL), list[Path])
    assert_type(lm.check_installed(lm.DEFAULT_MODEL, cache_dir=Path("/tmp/x")), None)
    assert_type(lm.default_cache_dir(), Path)
    with lm.LocalModel(threads=1) as local:
        assert_type(local, lm.LocalModel)
        assert_type(local.base_url, str)
        assert_type(local.model_name, str)
        caller = local.caller()
        assert_type(caller, OpenAICaller)
        _seam: StructuredCaller = caller


async def check_local_async() -> None:
    async with lm.LocalModel() as local:
        assert_type(local, lm.LocalModel)


def check_demo() -> None:
    index = BM25Index(load_corpus())
    assert_type(index.search("lake"), list[Hit])
    assert_type(search_tool(index), FunctionTool[SearchArgs, Hit])
    assert_type(delete_tool(index), FunctionTool[DeleteArgs, str])
    assert_type(GroundedAnswer(passage_id="a", answer="b").passage_id, str)
