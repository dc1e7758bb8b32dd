"""LangGraph: a two-node ``StateGraph`` (model, tools) that finishes when the model calls ``Answer``.

This is LangGraph's documented pattern for a typed final answer within the same model call: the
answer schema is bound as one more tool. (The prebuilt agent's ``response_format`` would make a
fifth, separate model call for the structured answer, which is not the scenario.)
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from benchmarks import scenario


@tool
def search(query: str) -> str:
    """Search the corpus."""
    return scenario.items_json(scenario.search_items(query))


class LangGraph:
    def __init__(self, base_url: str) -> None:
        self.llm = ChatOpenAI(  # type: ignore[call-arg]  # its documented keywords are pydantic aliases
            model=scenario.MODEL, base_url=base_url, api_key="bench", max_retries=0
        )
        model = self.llm.bind_tools([search, scenario.Answer], tool_choice="any")

        async def agent(state: MessagesState) -> dict[str, Any]:
            return {"messages": [await model.ainvoke(state["messages"])]}

        def route(state: MessagesState) -> str:
            last = state["messages"][-1]
            assert isinstance(last, AIMessage)
            return END if last.tool_calls[0]["name"] == "Answer" else "tools"

        builder = StateGraph(MessagesState)
        builder.add_node("agent", agent)
        builder.add_node("tools", ToolNode([search]))
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", route, ["tools", END])
        builder.add_edge("tools", "agent")
        self.graph = builder.compile()

    async def run(self, run_id: str) -> None:
        state = await self.graph.ainvoke(
            {"messages": [SystemMessage(scenario.SYSTEM), HumanMessage(scenario.question(run_id))]},
            {"recursion_limit": 20},
        )
        last = state["messages"][-1]
        scenario.check_answer(scenario.Answer.model_validate(last.tool_calls[0]["args"]))

    async def aclose(self) -> None:
        await self.llm.root_async_client.close()


def make(base_url: str) -> LangGraph:
    return LangGraph(base_url)
