"""FailoverMiddleware: swerve for ``langchain.agents.create_agent`` (needs the ``agents`` extra)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

from langchain.agents.middleware.types import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.language_models import BaseChatModel

from swerve import Failover, FallbackConfig, HealthStore

from ._chat import FailoverChatModel

__all__ = ["FailoverMiddleware"]


class FailoverMiddleware(AgentMiddleware):
    """Fail an agent's model calls over between routes.

    ``routes`` maps routes to chat models; the agent's own model (``create_agent(model=...)``)
    should be one of them, usually the primary's. Every model call whose ``request.model`` is
    one of the route models runs on a :class:`FailoverChatModel` asking for that route:
    retries, swaps, cooldowns and stream semantics are the chat model's, and one engine
    serves every step and every run, so a route degraded in step 1 is skipped from step 2 on
    without paying its retries again. A call for a model that is not a route passes through
    untouched, and so does anything the handler raises, LangGraph interrupts included.
    """

    def __init__(
        self,
        routes: Mapping[str, BaseChatModel],
        primary: str | None = None,
        config: FallbackConfig | None = None,
        health: HealthStore | None = None,
        *,
        failover: Failover | None = None,
        mid_stream: Literal["error", "restart"] = "error",
    ) -> None:
        super().__init__()
        if not routes:
            raise ValueError("FailoverMiddleware needs at least one route")
        self.routes = dict(routes)
        self.model = FailoverChatModel(
            routes=self.routes,
            primary=primary or next(iter(self.routes)),
            config=config,
            health=health,
            failover=failover,
            mid_stream=mid_stream,
        )
        self._by_model = {id(model): route for route, model in self.routes.items()}
        self._models = {route: self.model.with_primary(route) for route in self.routes}

    @property
    def engine(self) -> Failover:
        return self.model.engine

    def _request(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        route = self._by_model.get(id(request.model))
        return request if route is None else request.override(model=self._models[route])

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> Any:
        return handler(self._request(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> Any:
        return await handler(self._request(request))
