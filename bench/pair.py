"""The recorded pair every replay server answers: a ~1.6 KB chat completion request, a ~1.25 KB answer."""

from __future__ import annotations

import json
from typing import Any

MODEL = "gpt-4o-mini"

SYSTEM = (
    "You are a support assistant for an online bookshop. Answer in two or three short paragraphs, "
    "cite the order number when the customer gives one, never invent tracking numbers, and hand over "
    "to a human when the customer asks for a refund above 200 EUR or mentions a legal dispute. "
    "Keep a friendly, plain tone and avoid marketing language. Shipping: standard delivery takes "
    "three to five working days inside the EU, express one to two; lost parcels are investigated with "
    "the carrier for two working days before a free replacement goes out. Returns are free within 30 "
    "days for unread books in their original condition; damaged books are replaced without a return."
)
HISTORY = [
    ("user", "Hello, I ordered three books last Tuesday (order 48213-A) and only two arrived."),
    (
        "assistant",
        "I am sorry about that. Order 48213-A was shipped in two parcels; the second one left our "
        "warehouse on Thursday. Could you tell me which title is missing so I can check its parcel?",
    ),
    (
        "user",
        "The missing one is 'The Left Hand of Darkness', the hardcover edition. The tracking page says "
        "delivered but nothing is in my mailbox, and my neighbours have not seen a parcel either. "
        "What can I do now, and how long will a replacement take if it is really lost? I need it for "
        "a reading group next Friday, and the shop in town has no copy left.",
    ),
]

ANSWER_TEXT = (
    "Thank you for the details. I checked order 48213-A: the hardcover of 'The Left Hand of Darkness' "
    "travelled in the second parcel, which the carrier marked as delivered yesterday at 14:10.\n\n"
    "When a parcel shows as delivered but cannot be found, the carrier opens an investigation that "
    "usually takes two working days. I have started one for you, so there is nothing else you need to "
    "do. If the parcel does not turn up by then, we send a replacement by express delivery at no cost, "
    "which arrives within one to two working days, in time for your reading group next Friday.\n\n"
    "If you would rather not wait, I can also send the replacement today and cancel the investigation "
    "afterwards. Just reply with 'send it now' and I will arrange it. Is there anything else I can help "
    "you with? Your order history and this conversation stay available in your account."
)


def request_body() -> dict[str, Any]:
    messages = [{"role": "system", "content": SYSTEM}]
    messages += [{"role": role, "content": text} for role, text in HISTORY]
    return {
        "model": MODEL,
        "messages": messages,
        "temperature": 0.2,
        "max_tokens": 400,
        "top_p": 1,
        "presence_penalty": 0,
        "frequency_penalty": 0,
        "user": "customer-7781",
        "seed": 20261129,
    }


def responses_body() -> dict[str, Any]:
    """The same conversation as a Responses API request (instructions and input items)."""
    return {
        "model": MODEL,
        "instructions": SYSTEM,
        "input": [{"role": role, "content": text} for role, text in HISTORY],
        "temperature": 0.2,
        "max_output_tokens": 400,
        "top_p": 1,
        "user": "customer-7781",
        "store": True,
        "metadata": {"ticket": "48213-A", "channel": "chat"},
    }


GEMINI_MODEL = "gemini-2.5-flash"


def gemini_body() -> dict[str, Any]:
    """The same conversation as a Gemini API request (the model is in its path, GEMINI_MODEL)."""
    return {
        "systemInstruction": {"parts": [{"text": SYSTEM}]},
        "contents": [
            {"role": "model" if role == "assistant" else "user", "parts": [{"text": text}]}
            for role, text in HISTORY
        ],
        "generationConfig": {"temperature": 0.2, "maxOutputTokens": 400, "topP": 1},
    }


def messages_body() -> dict[str, Any]:
    """The same conversation as an Anthropic Messages request (system and messages)."""
    return {
        "model": MODEL,
        "system": SYSTEM,
        "messages": [{"role": role, "content": text} for role, text in HISTORY],
        "temperature": 0.2,
        "max_tokens": 400,
        "top_p": 1,
        "metadata": {"user_id": "customer-7781"},
    }


def completion() -> dict[str, Any]:
    """The recorded answer as an OpenAI chat.completion (id and created are replaced at replay)."""
    return {
        "id": "chatcmpl-B7qYc2x4JgVJ0oQe9lY3cQb1rX9aZ",
        "object": "chat.completion",
        "created": 1764440000,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": ANSWER_TEXT, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 312, "completion_tokens": 187, "total_tokens": 499},
        "system_fingerprint": "fp_0ba0d124f1",
    }


def request_bytes() -> bytes:
    return json.dumps(request_body()).encode()


def answer_bytes() -> bytes:
    return json.dumps(completion()).encode()


if __name__ == "__main__":
    print(len(request_bytes()), len(answer_bytes()))
