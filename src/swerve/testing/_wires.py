"""The two wires the fake speaks, OpenAI chat completions and Anthropic messages.

Bodies, SSE events and error shapes mirror the real APIs closely enough that the openai and
anthropic SDKs (and swerve's classifier) cannot tell the difference.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from collections.abc import Iterator
from http import HTTPStatus
from typing import Any, Literal

from ._model import ErrorStyle, Reply

# Events are tagged so the server can cut a stream at the right place for a fault:
# "content" carries model output (counted by the *_after faults), "finish" is the finish
# information (finish chunk, usage chunk / message_delta), "done" the terminator that follows it
# ([DONE] / message_stop), "frame" is everything else.
EventKind = Literal["frame", "content", "finish", "done"]
Event = tuple[EventKind, bytes]
Body = dict[str, Any]

_ARG_PIECE = 8  # characters of tool-call JSON per streamed delta

_OPENAI_ERRORS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Invalid request."),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
    404: ("invalid_request_error", "model_not_found", "The model does not exist."),
    429: ("requests", "rate_limit_exceeded", "Rate limit reached for requests."),
    500: (
        "server_error",
        None,
        "The server had an error while processing your request. Sorry about that!",
    ),
    503: ("server_error", None, "The server is overloaded or not ready yet."),
}
_ANTHROPIC_ERRORS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Invalid request."),
    401: ("authentication_error", "invalid x-api-key"),
    402: ("billing_error", "Your credit balance is too low to access the Anthropic API."),
    403: ("permission_error", "Your API key does not have permission to use this resource."),
    404: ("not_found_error", "Not found."),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", "Number of requests has exceeded your rate limit."),
    500: ("api_error", "Internal server error"),
    529: ("overloaded_error", "Overloaded"),
}


def _dumps(obj: object) -> str:
    return json.dumps(obj, separators=(",", ":"))


def sse(data: object, event: str | None = None) -> bytes:
    """One SSE event; the data line is compact JSON (or a literal str such as ``[DONE]``)."""
    payload = data if isinstance(data, str) else _dumps(data)
    return (f"event: {event}\n" if event else "").encode() + f"data: {payload}\n\n".encode()


def words(text: str) -> list[str]:
    """Word-sized pieces whose concatenation is ``text`` (leading spaces, like tokens)."""
    return re.findall(r"\s*\S+|\s+", text)


def _pieces(text: str) -> list[str]:
    return [text[i : i + _ARG_PIECE] for i in range(0, len(text), _ARG_PIECE)]


def signature(reasoning: str) -> str:
    """A stable fake signature, so tests can check signed reasoning survives untouched."""
    return "fakesig-" + hashlib.sha256(reasoning.encode()).hexdigest()[:32]


def _phrase(code: int) -> str:
    try:
        return HTTPStatus(code).phrase
    except ValueError:
        return "Overloaded" if code == 529 else f"Error {code}"


def anthropic_error(code: int, message: str | None = None, *, in_stream: bool = False) -> Body:
    """Anthropic's error body for ``code``; in a stream, 503 reads as ``overloaded_error``."""
    if in_stream and code == 503:
        code = 529
    fallback = ("api_error", "Internal server error") if code >= 500 else None
    etype, text = (
        _ANTHROPIC_ERRORS.get(code) or fallback or ("invalid_request_error", _phrase(code))
    )
    return {"type": "error", "error": {"type": etype, "message": message or text}}


def openai_error(
    code: int, message: str | None = None, *, param: str | None = None, err_code: Any = None
) -> Body:
    """OpenAI's error body for HTTP status ``code``."""
    fallback = ("server_error" if code >= 500 else "invalid_request_error", None, _phrase(code))
    etype, default_code, text = _OPENAI_ERRORS.get(code, fallback)
    error = {"message": message or text, "type": etype, "param": param}
    return {"error": {**error, "code": err_code if err_code is not None else default_code}}


def style_error(style: ErrorStyle, code: int, message: str | None = None) -> Body:
    """The error payload as ``style`` sends it inside a 200 response."""
    if style == "anthropic":
        return anthropic_error(code, message, in_stream=True)
    if style == "openai":
        return openai_error(code, message, err_code=code)
    return {"error": {"code": code, "message": message or _phrase(code)}}


def stream_error(style: ErrorStyle, code: int, model: str, message: str | None = None) -> bytes:
    """The SSE event(s) carrying a ``style`` error mid-stream."""
    if style == "anthropic":
        return sse(style_error(style, code, message), event="error")
    if style == "openai":
        return sse(style_error(style, code, message))
    # OpenRouter wraps the error in an otherwise ordinary chunk that finishes with "error".
    choice = {"index": 0, "delta": {"content": ""}, "finish_reason": "error"}
    chunk = {**_chunk_head(model), **style_error(style, code, message), "choices": [choice]}
    return sse(chunk)


def malformed_body(completion: Body) -> bytes:
    """A non-stream body that is not JSON: the first half of ``completion``."""
    whole = json.dumps(completion).encode()
    return whole[: len(whole) // 2]


def _chunk_head(model: str, chunk_id: str | None = None) -> Body:
    return {
        "id": chunk_id or f"gen-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": None,
    }


def _text_blocks(body: Body) -> Iterator[tuple[str, Body]]:
    """Every text-bearing block of a request, with the path the real API names it by."""
    system = body.get("system")
    if isinstance(system, list):
        yield from ((f"system.{j}", b) for j, b in enumerate(system) if isinstance(b, dict))
    messages = body.get("messages")
    for i, message in enumerate(messages if isinstance(messages, list) else []):
        content = message.get("content") if isinstance(message, dict) else None
        for j, block in enumerate(content if isinstance(content, list) else []):
            if not isinstance(block, dict):
                continue
            yield f"messages.{i}.content.{j}", block
            inner = block.get("content")  # tool_result blocks nest their own blocks
            for k, sub in enumerate(inner if isinstance(inner, list) else []):
                if isinstance(sub, dict):
                    yield f"messages.{i}.content.{j}.content.{k}", sub


def empty_text_problem(body: Body) -> str | None:
    """Anthropic's complaint about empty text blocks in ``body``, if it has one."""
    for where, block in _text_blocks(body):
        text = block.get("text")
        if block.get("type") != "text" or not isinstance(text, str):
            continue
        if not text.strip() and block.get("cache_control"):
            return f"{where}.text: cache_control cannot be set for empty text blocks"
        if not text:
            return "messages: text content blocks must be non-empty"
        if not text.strip():
            return "messages: text content blocks must contain non-whitespace text"
    return None


class Wire:
    """One API shape: request validation, success bodies and SSE events, error bodies."""

    style: ErrorStyle
    """How this wire's real providers send an error inside a 200 stream."""
    malformed_event: bytes
    """An SSE event whose data is truncated JSON (a broken proxy, a cut buffer)."""

    def error(self, code: int, message: str | None = None, param: str | None = None) -> Body:
        """The wire's error body for an HTTP status."""
        raise NotImplementedError

    def context_overflow(self) -> Body:
        """The wire's real "prompt is too long" body (sent with 400)."""
        raise NotImplementedError

    def validate(self, body: Body) -> Body | None:
        """A 400 error body when the real API would reject ``body``, else None."""
        raise NotImplementedError

    def completion(self, reply: Reply, text: str, model: str, finished: bool = True) -> Body:
        """The non-stream response body."""
        raise NotImplementedError

    def events(self, reply: Reply, text: str, model: str, include_usage: bool) -> list[Event]:
        """The full SSE stream of a successful response, tagged per event."""
        raise NotImplementedError


def _tool_ids(reply: Reply, prefix: str) -> list[str]:
    return [call.id or f"{prefix}{uuid.uuid4().hex[:24]}" for call in reply.tool_calls]


class OpenAIWire(Wire):
    """``POST /v1/chat/completions`` (OpenAI, OpenRouter and other compatible gateways)."""

    style: ErrorStyle = "openrouter"
    malformed_event = b'data: {"choices": [\n\n'

    def error(self, code: int, message: str | None = None, param: str | None = None) -> Body:
        return openai_error(code, message, param=param)

    def context_overflow(self) -> Body:
        message = (
            "This model's maximum context length is 128000 tokens. However, your messages "
            "resulted in 250000 tokens. Please reduce the length of the messages."
        )
        return openai_error(400, message, param="messages", err_code="context_length_exceeded")

    def validate(self, body: Body) -> Body | None:
        if not body.get("model"):
            return self.error(400, "you must provide a model parameter")
        if "messages" not in body:
            message = "Missing required parameter: 'messages'."
            return openai_error(
                400, message, param="messages", err_code="missing_required_parameter"
            )
        # OpenRouter relays Claude requests to Anthropic, which applies its own checks.
        problem = "claude" in str(body["model"]) and empty_text_problem(body)
        return self.error(400, problem) if problem else None

    def _usage(self, reply: Reply) -> Body:
        n_in, n_out = reply.usage
        usage: Body = {
            "prompt_tokens": n_in,
            "completion_tokens": n_out,
            "total_tokens": n_in + n_out,
        }
        if reply.cached[0]:  # OpenAI reports cache reads only
            usage["prompt_tokens_details"] = {"cached_tokens": reply.cached[0]}
        return usage

    def _reasoning_details(self, text: str, sig: str | None) -> list[Body]:
        detail: Body = {"type": "reasoning.text", "text": text, "format": "anthropic-claude-v1"}
        return [{**detail, "index": 0, **({"signature": sig} if sig else {})}]

    def completion(self, reply: Reply, text: str, model: str, finished: bool = True) -> Body:
        message: Body = {"role": "assistant", "content": text or (None if reply.tool_calls else "")}
        if reply.reasoning:
            message["reasoning"] = reply.reasoning
            sig = signature(reply.reasoning)
            message["reasoning_details"] = self._reasoning_details(reply.reasoning, sig)
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": tid,
                    "type": "function",
                    "function": {"name": c.name, "arguments": _dumps(c.arguments)},
                }
                for tid, c in zip(_tool_ids(reply, "call_"), reply.tool_calls, strict=True)
            ]
        finish = ("tool_calls" if reply.tool_calls else "stop") if finished else None
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "system_fingerprint": None,  # the real API sends it; the openrouter SDK requires it
            "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
            ],
            "usage": self._usage(reply),
        }

    def events(self, reply: Reply, text: str, model: str, include_usage: bool) -> list[Event]:
        head = _chunk_head(model, f"chatcmpl-{uuid.uuid4().hex[:24]}")
        # With include_usage the real API puts "usage": null on every chunk but the last.
        tail: Body = {"usage": None} if include_usage else {}

        def chunk(delta: Body, finish: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return sse({**head, "choices": [choice], **tail})

        out: list[Event] = [("frame", chunk({"role": "assistant", "content": ""}))]
        if reply.reasoning:
            pieces = words(reply.reasoning)
            for n, piece in enumerate(pieces, 1):
                sig = signature(reply.reasoning) if n == len(pieces) else None
                delta = {
                    "reasoning": piece,
                    "reasoning_details": self._reasoning_details(piece, sig),
                }
                out.append(("content", chunk(delta)))
        out += [("content", chunk({"content": piece})) for piece in words(text)]
        for i, (tid, call) in enumerate(
            zip(_tool_ids(reply, "call_"), reply.tool_calls, strict=True)
        ):
            start = {
                "index": i,
                "id": tid,
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            out.append(("content", chunk({"tool_calls": [start]})))
            for piece in _pieces(_dumps(call.arguments)):
                delta = {"tool_calls": [{"index": i, "function": {"arguments": piece}}]}
                out.append(("content", chunk(delta)))
        out.append(("finish", chunk({}, "tool_calls" if reply.tool_calls else "stop")))
        if include_usage:
            out.append(("finish", sse({**head, "choices": [], "usage": self._usage(reply)})))
        out.append(("done", sse("[DONE]")))
        return out


class AnthropicWire(Wire):
    """``POST /v1/messages`` (Anthropic)."""

    style: ErrorStyle = "anthropic"
    malformed_event = (
        b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, '
        b'"delta": {\n\n'
    )

    def error(self, code: int, message: str | None = None, param: str | None = None) -> Body:
        return anthropic_error(code, message)

    def context_overflow(self) -> Body:
        return anthropic_error(400, "prompt is too long: 250000 tokens > 200000 maximum")

    def validate(self, body: Body) -> Body | None:
        for field in ("model", "messages"):
            if field not in body:
                return self.error(400, f"{field}: Field required")
        problem = empty_text_problem(body)
        return self.error(400, problem) if problem else None

    def _blocks(self, reply: Reply, text: str) -> list[Body]:
        blocks: list[Body] = []
        if reply.reasoning:
            sig = signature(reply.reasoning)
            blocks.append({"type": "thinking", "thinking": reply.reasoning, "signature": sig})
        if text:
            blocks.append({"type": "text", "text": text})
        for tid, call in zip(_tool_ids(reply, "toolu_"), reply.tool_calls, strict=True):
            blocks.append(
                {"type": "tool_use", "id": tid, "name": call.name, "input": dict(call.arguments)}
            )
        return blocks

    def completion(self, reply: Reply, text: str, model: str, finished: bool = True) -> Body:
        n_in, n_out = reply.usage
        return {
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": self._blocks(reply, text),
            "stop_reason": ("tool_use" if reply.tool_calls else "end_turn") if finished else None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": n_in,
                "output_tokens": n_out,
                "cache_creation_input_tokens": reply.cached[1],
                "cache_read_input_tokens": reply.cached[0],
            },
        }

    def events(self, reply: Reply, text: str, model: str, include_usage: bool) -> list[Event]:
        def event(kind: EventKind, name: str, **data: Any) -> Event:
            return kind, sse({"type": name, **data}, event=name)

        message = self.completion(reply, text, model)
        message.update(content=[], stop_reason=None)
        message["usage"] = {**message["usage"], "output_tokens": 1}
        out = [event("frame", "message_start", message=message)]
        ping = event("frame", "ping")
        for index, block in enumerate(self._blocks(reply, text)):
            kind = block["type"]
            opened = {**block, **_EMPTY_BLOCK[kind]}
            out.append(event("frame", "content_block_start", index=index, content_block=opened))
            if index == 0:
                out.append(ping)  # the real API pings right after the first block opens
            delta_type, key = _DELTA[kind]
            source = _dumps(block["input"]) if kind == "tool_use" else block[kind]
            pieces = _pieces(source) if kind == "tool_use" else words(source)
            for piece in pieces:
                delta = {"type": delta_type, key: piece}
                out.append(event("content", "content_block_delta", index=index, delta=delta))
            if kind == "thinking":
                delta = {"type": "signature_delta", "signature": block["signature"]}
                out.append(event("frame", "content_block_delta", index=index, delta=delta))
            out.append(event("frame", "content_block_stop", index=index))
        if len(out) == 1:
            out.append(ping)
        stop = {
            "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
            "stop_sequence": None,
        }
        usage = {"output_tokens": reply.usage[1]}
        out.append(event("finish", "message_delta", delta=stop, usage=usage))
        out.append(event("done", "message_stop"))
        return out


# How each Anthropic block kind opens (content_block_start) and streams its deltas.
_EMPTY_BLOCK: dict[str, Body] = {
    "thinking": {"thinking": "", "signature": ""},
    "text": {"text": ""},
    "tool_use": {"input": {}},
}
_DELTA = {
    "thinking": ("thinking_delta", "thinking"),
    "text": ("text_delta", "text"),
    "tool_use": ("input_json_delta", "partial_json"),
}

WIRES: dict[str, Wire] = {"v1/chat/completions": OpenAIWire(), "v1/messages": AnthropicWire()}
"""Wire by the path after ``/<provider>/``."""
