"""`--rm-type remote_rm --rm-url URL`: a reward model behind HTTP, as miles' `remote_rm` calls it.

Each sample is one POST of JSON `{"prompt", "response", "label"}`; the reply's JSON is the reward
(a number, or a dict read with --reward-key). Beyond miles (which makes one unbounded attempt per
sample): at most CONCURRENCY requests in flight, a TIMEOUT_S limit per attempt, and ATTEMPTS
tries with exponential backoff for what may pass on a retry (connection errors, timeouts, HTTP
429 and 5xx). A 4xx other than 429, a reply that is not JSON, or a last failed attempt fails the
run with RemoteRewardError naming the URL, the sample and the HTTP status.

aiohttp is the client (already a dependency of ray[default], as for miles).
"""

from __future__ import annotations

import asyncio
from typing import Any

CONCURRENCY = 64
TIMEOUT_S = 60.0
ATTEMPTS = 4
BACKOFF_S = 0.5  # then 1 s, 2 s
BODY_CHARS = 200  # of an error reply, quoted in the message


class RemoteRewardError(RuntimeError):
    """The reward server kept failing; str() names the URL, the sample and the status."""


class _Retry(Exception):
    """A failure worth another attempt; str() is what the last one said."""


class RemoteRewardModel:
    """One client per run: `open()` and `close()` bracket each rollout's scoring (an aiohttp
    session belongs to one event loop); `score()` is safe to gather by the hundred."""

    def __init__(self, url: str, concurrency: int = CONCURRENCY, timeout_s: float = TIMEOUT_S,
                 attempts: int = ATTEMPTS, backoff_s: float = BACKOFF_S) -> None:
        self.url = url
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.posted = 0  # requests sent, retries included (the tests read it)
        self._session: Any = None
        self._slots: asyncio.Semaphore | None = None

    def open(self) -> None:
        """Called inside the running loop, before the gather."""
        import aiohttp

        connector = aiohttp.TCPConnector(limit=self.concurrency)
        self._session = aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        self._slots = asyncio.Semaphore(self.concurrency)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
        self._session = None

    async def score(self, sample: Any) -> Any:  # noqa: ANN401 - a UserSample
        payload = {"prompt": sample.prompt, "response": sample.response, "label": sample.label}
        assert self._slots is not None and self._session is not None, "open() first"
        last = ""
        for attempt in range(self.attempts):
            if attempt:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                async with self._slots:
                    return await self._post(payload, sample.index)
            except _Retry as why:
                last = str(why)
        raise RemoteRewardError(f"remote reward model {self.url} failed for sample "
                                f"{sample.index} after {self.attempts} attempts: {last}")

    async def _post(self, payload: dict[str, Any], index: int) -> Any:  # noqa: ANN401
        import aiohttp

        self.posted += 1
        try:
            async with self._session.post(self.url, json=payload) as resp:
                body = await resp.read()
                status = f"HTTP {resp.status} ({resp.reason})"
        except TimeoutError as err:
            raise _Retry(f"no reply within {self.timeout_s:.0f} s") from err
        except aiohttp.ClientError as err:
            raise _Retry(f"{type(err).__name__}: {err}") from err
        text = body[:BODY_CHARS].decode(errors="replace")
        if resp.status == 429 or resp.status >= 500:
            raise _Retry(f"{status}: {text}")
        if resp.status >= 400:
            raise RemoteRewardError(f"remote reward model {self.url} answered {status} for "
                                    f"sample {index}: {text}")
        try:
            import json

            return json.loads(body)
        except ValueError as err:
            raise RemoteRewardError(f"remote reward model {self.url} answered {status} for "
                                    f"sample {index} with a body that is not JSON: "
                                    f"{text!r}") from err
