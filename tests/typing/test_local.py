"""assert_type checks for agentkit.providers.local and the demo's public entry points (mypy only)."""

from __future__ import annotations

from pathlib import Path
from typing import assert_type

from agentkit._demo.agent import DeleteArgs, GroundedAnswer, delete_tool
from agentkit._demo.search import BM25Index, Hit, SearchArgs, load_corpus, search_tool
from agentkit._structured import StructuredCaller
from agentkit._tools import FunctionTool
from agentkit.providers.local import (
    DEFAULT_MODEL,
    ChunkedModel,
    LocalModel,
    check_installed,
    default_cache_dir,
    ensure_model_file,
    locate_chunks,
)
from agentkit.providers.openai import OpenAICaller


def check_local() -> None:
    assert_type(DEFAULT_MODEL, ChunkedModel)
    assert_type(ensure_model_file(DEFAULT_MODEL, cache_dir="/tmp/x"), Path)
    assert_type(locate_chunks(DEFAULT_MODEL), list[Path])
    assert_type(check_installed(DEFAULT_MODEL, cache_dir=Path("/tmp/x")), None)
    assert_type(default_cache_dir(), Path)
    with LocalModel(threads=1) as local:
        assert_type(local, LocalModel)
        assert_type(local.base_url, str)
        assert_type(local.model_name, str)
        caller = local.caller()
        assert_type(caller, OpenAICaller)
        _seam: StructuredCaller = caller


async def check_local_async() -> None:
    async with LocalModel() as local:
        assert_type(local, LocalModel)


def check_demo() -> None:
    index = BM25Index(load_corpus())
    assert_type(index.search("lake"), list[Hit])
    assert_type(search_tool(index), FunctionTool[SearchArgs, Hit])
    assert_type(delete_tool(index), FunctionTool[DeleteArgs, str])
    assert_type(GroundedAnswer(passage_id="a", answer="b").passage_id, str)
