"""One canned OpenAI chat completion, for tests whose upstream answers at once without a
server (an httpx ``MockTransport``): the hot-path count and the transport's clock."""

from __future__ import annotations

import json

COMPLETION = json.dumps(
    {
        "id": "r1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "hello"},
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
).encode()
