"""Secrets taken out of text before it reaches a log: bearer tokens, `authorization` values, `password=` and
`token=` style values, passwords in URLs and the project's account tokens (`chm_` + 43 URL-safe characters).

    redact("authorization: Bearer chm_Xq7...")    # 'authorization: Bearer ***'
    redact("postgresql://cheems:s3cret@db/x")     # 'postgresql://cheems:***@db/x'

`RedactFilter` applies it to every record a handler receives: the message (with its arguments merged in, so a
token inside a tuple or a dict's repr is caught as well), and the traceback text. Masking too much is harmless,
too little is not: a value is masked up to the next space, quote, comma, semicolon or brace.
"""

from __future__ import annotations

import logging
import re

MASK = "***"
_VALUE = r"[^\s\"',;}\]`]+"  # a secret's value: up to a separator
_NOT_MASKED = rf"(?!{re.escape(MASK)})"
_SCHEMES = r"(?:bearer|basic|token|digest)"
_KEYS = r"password|passwd|pwd|token|access_token|refresh_token|api_key|apikey|secret|client_secret"
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # the project's account tokens (services.store.accounts.new_token), wherever they appear
    (re.compile(r"\bchm_[A-Za-z0-9_-]{8,}"), "chm_" + MASK),
    # `authorization: Bearer x`, `('authorization', 'Basic x')`, `Authorization=x` (HTTP headers, gRPC metadata)
    (
        re.compile(
            rf"(?i)(\bauthorization[\"']?\s*[:=,]\s*[\"']?)({_SCHEMES}\s+)?{_NOT_MASKED}(?!{_SCHEMES}\s){_VALUE}"
        ),
        r"\1\2" + MASK,
    ),
    # `Bearer x` anywhere else, x long enough to be a credential (not the word in "a bearer token: send it")
    (re.compile(rf"(?i)\b(bearer\s+){_NOT_MASKED}[^\s\"',;}}\]`:]{{8,}}"), r"\1" + MASK),
    # `password=x`, `?token=x`, `"api_key": "x"` (a JSON key), `VLLM_API_KEY=x` (an environment variable)
    (re.compile(rf"(?i)(\b(?:[a-z0-9]+_)*(?:{_KEYS})(?:=|[\"']\s*:\s*[\"']?)){_NOT_MASKED}{_VALUE}"), r"\1" + MASK),
    # user:password@host in a URL
    (re.compile(r"(\b[A-Za-z][\w+.-]*://[^\s:/@]*:)[^\s/@]+@"), r"\1" + MASK + "@"),
)


def redact(text: str) -> str:
    """`text` with every secret the patterns above know replaced by ***."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


class RedactFilter(logging.Filter):
    """A handler filter: the record's message and traceback with their secrets masked (it never drops a record).

    The merged message replaces `msg` and `args` (the record is shared by every handler, so all of them see
    the masked text); the traceback is formatted once here and masked in `exc_text`, which formatters reuse.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: logging reports it at format time, nothing to mask here
            return True
        masked = redact(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True
