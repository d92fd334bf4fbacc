"""Pod logs: chunks shipped by the node agents, stored once each, read back page by page.

Offsets are byte offsets into the pod's log as the agent wrote it. A restarted agent may ship a
part again in chunks cut differently; reading skips whatever was already returned.
"""

import logging
from dataclasses import dataclass

from django.db.models import Q

from jobs.models import Pod, PodLog

log = logging.getLogger(__name__)

DEFAULT_LIMIT = 64 * 1024


@dataclass(frozen=True)
class LogPage:
    text: str
    offset: int  # where this page starts
    next_offset: int  # pass this to read the next page; == offset when nothing new has arrived

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()


def store_chunks(chunks: list[dict]) -> int:
    """Store [{pod_id, offset, text}, ...]; returns how many were for known pods."""
    pods = dict(Pod.objects.filter(pod_id__in={c["pod_id"] for c in chunks}).values_list("pod_id", "pk"))
    rows = []
    for c in chunks:
        if c["pod_id"] not in pods:
            log.warning("log chunk for unknown pod %s dropped", c["pod_id"])
            continue
        size = len(c["text"].encode())
        rows.append(PodLog(pod_id=pods[c["pod_id"]], offset=c["offset"], end=c["offset"] + size, text=c["text"]))
    # ignore_conflicts: the same chunk may arrive twice (a redelivered message).
    PodLog.objects.bulk_create(rows, ignore_conflicts=True)
    for row in rows:
        # A restarted agent re-ships from an earlier offset, possibly in a longer chunk: keep the
        # longer one, or the bytes past the shorter one's end would be a gap forever.
        PodLog.objects.filter(pod_id=row.pod_id, offset=row.offset, end__lt=row.end).update(end=row.end, text=row.text)
    return len(rows)


def read_logs(pod: Pod, offset: int = 0, limit: int = DEFAULT_LIMIT) -> LogPage:
    """At most about `limit` bytes of the pod's log starting at byte `offset`."""
    chunks = PodLog.objects.filter(Q(end__gt=offset) & Q(offset__lt=offset + limit), pod=pod).order_by("offset")
    parts, position = [], offset
    for chunk in chunks.only("offset", "end", "text"):
        if chunk.offset > position:
            break  # a gap: that part has not arrived yet
        if chunk.end <= position:
            continue
        data = chunk.text.encode()[position - chunk.offset:]
        parts.append(data)
        position += len(data)
        if position - offset >= limit:
            break
    return LogPage(b"".join(parts).decode("utf-8", "replace"), offset, position)


def read_all(pod: Pod) -> str:
    """The whole log as far as it has arrived."""
    text, offset = [], 0
    while True:
        page = read_logs(pod, offset, limit=1024 * 1024)
        if page.next_offset == offset:
            return "".join(text)
        text.append(page.text)
        offset = page.next_offset
