"""The weight version of each token, counted by the plugin where SGLang labels none (before 0.5.19).

SGLang 0.5.19 on records, at every version change, each live request's output length under the
version it leaves, and puts the spans on the request's final output (``meta_info.weight_versions``,
and ``meta_info.weight_version`` the last span's). Before, the TokenizerManager only keeps a
config value. :class:`VersionLabels` does the same bookkeeping in the HTTP process: at every
change of that value (a hook on the TokenizerManager's ``record_config_updates``, whoever makes
it), each request's tokens received so far are recorded under the version they leave; when the
request's state is deleted (its last output arrived) the version in force is frozen for it; its
final output gets the spans, computed as SGLang computes them.

So a token carries the version in force when its output reached the TokenizerManager, not when
the scheduler decoded it: a token decoded just before a change and received just after carries
the new version. The plugin marks every request streaming towards the scheduler, so each step's
tokens arrive as they are made (a non-streaming request's would otherwise come every 50, and up to
49 could carry the wrong label). The facts, with file and line, are in ``docs/engine-notes.md``
("SGLang 0.5.18").
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional


def compute_spans(events: list[tuple[str, int]], current: str, num_tokens: int) -> list[dict]:
    """The spans over *num_tokens* output tokens, from the changes *events* (``(version left,
    tokens so far)``, in order) and the version *current* in force at the end: SGLang's
    ``compute_weight_version_spans`` and ``add_weight_versions_to_meta_info`` (0.5.19), as dicts."""
    spans: list[dict] = []
    for version, end in [*events, (current, num_tokens)]:
        end = min(end, num_tokens)
        if spans and end <= spans[-1]["end"]:
            continue
        if spans and version == spans[-1]["version"]:
            spans[-1]["end"] = end
            continue
        spans.append({"version": version, "start": spans[-1]["end"] if spans else 0, "end": end})
    return [s for s in spans if s["start"] < num_tokens or s["start"] == 0]


class VersionLabels:
    """The version changes each request in flight has seen, by rid (one TokenizerManager's)."""

    def __init__(self) -> None:
        self._events: dict[str, list[tuple[str, int]]] = {}
        self._final: dict[str, str] = {}
        self._ended: set[str] = set()
        """Requests forgotten while SGLang still held their state (a caller that went first):
        nothing is kept when the state goes."""

    def changing(self, old_version: str, new_version: str, tokens: Mapping[str, int]) -> None:
        """The version goes from *old_version* to *new_version*: each request's *tokens* so far
        (by rid) were made under the old one. A change to the version in force changes nothing."""
        if new_version == old_version:
            return
        for rid, count in tokens.items():
            if count:
                self._events.setdefault(rid, []).append((old_version, count))

    def finished(self, rid: str, version: str) -> None:
        """*rid*'s last output has arrived (SGLang deleted its state) under *version*: a change
        made before the output is handed on does not reach its tokens."""
        if rid in self._ended:
            self._ended.discard(rid)
            self._events.pop(rid, None)
            return
        self._final.setdefault(rid, version)

    def label(self, meta_info: dict, current: str) -> None:
        """Put the spans on a final output's *meta_info*, as SGLang 0.5.19 does; an output that
        has them already is left as it is."""
        rid = meta_info.get("id")
        # Embeddings have no output tokens (and SGLang labels none).
        if not isinstance(rid, str) or "weight_versions" in meta_info or "completion_tokens" not in meta_info:
            return
        num_tokens = int(meta_info.get("completion_tokens") or 0)
        spans = compute_spans(self._events.pop(rid, []), self._final.pop(rid, current), num_tokens)
        meta_info["weight_versions"] = spans
        meta_info["weight_version"] = spans[-1]["version"]

    def forget(self, rid: Any, held: Callable[[str], bool] = lambda rid: False) -> None:
        """Drop what is kept for *rid* (a string, or a batch's list of them): its request has
        ended. One whose state SGLang still *held* (its caller went before its last output; SGLang
        drops the state when its generator is closed, a moment later) is dropped then."""
        for one in rid if isinstance(rid, list) else [rid]:
            if not isinstance(one, str):
                continue
            self._events.pop(one, None)
            if self._final.pop(one, None) is None and held(one):
                self._ended.add(one)

    def pending(self) -> int:
        """How many requests have labels kept (a check that nothing leaks)."""
        return len(self._events.keys() | self._final.keys() | self._ended)


def final_outputs(out: Any) -> list[dict]:
    """The final outputs' ``meta_info`` in one item a ``generate_request`` yields (a dict, or a
    non-streaming batch's list of them)."""
    items = out if isinstance(out, list) else [out]
    metas: list[dict] = []
    for item in items:
        meta: Optional[Any] = item.get("meta_info") if isinstance(item, dict) else None
        if isinstance(meta, dict) and meta.get("finish_reason") is not None:
            metas.append(meta)
    return metas
