"""Pod logs: chunks shipped by the node agents, stored once each, read back page by page.

Offsets are byte offsets into the pod's log as the agent wrote it. A restarted agent may ship a
part again in chunks cut differently; reading skips whatever was already returned.
"""

import logging
from dataclasses import dataclass

from django.db import connection
from django.db.models import Q
from django.utils import timezone

from dbkit import bulk
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
    longest: dict[tuple[int, int], tuple] = {}
    for c in chunks:
        if c["pod_id"] not in pods:
            log.warning("log chunk for unknown pod %s dropped", c["pod_id"])
            continue
        key = (pods[c["pod_id"]], c["offset"])
        row = (*key, c["offset"] + len(c["text"].encode()), c["text"])
        if key not in longest or longest[key][2] < row[2]:
            longest[key] = row
    if longest:
        # The same chunk may arrive twice (a redelivered message), and a restarted agent re-ships
        # from an earlier offset, possibly in a longer chunk: keep the longer one, or the bytes past
        # the shorter one's end would be a gap forever. One statement for the whole batch.
        q = connection.ops.quote_name
        keep_longer = (f"ON CONFLICT ({q('pod_id')}, {q('offset')}) DO UPDATE SET {q('end')} = excluded.{q('end')}, "
                       f"{q('text')} = excluded.{q('text')} WHERE {q(PodLog._meta.db_table)}.{q('end')} < excluded.{q('end')}")
        now = timezone.now()
        bulk.insert_rows(bulk.Insert(PodLog, ("pod", "offset", "end", "text", "received_at"),
                                     [(*row, now) for row in longest.values()], on_conflict=keep_longer))
    return sum(1 for c in chunks if c["pod_id"] in pods)


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
