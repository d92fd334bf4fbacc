"""Pod logs shipped in chunks are stored once and read back page by page."""

import pytest

from jobs import logs
from quotas.models import Node

pytestmark = pytest.mark.django_db


@pytest.fixture
def pod(make_pod, spec):
    return make_pod(Node.objects.create(name="n", spec=spec))


def chunk(pod, offset, text):
    return {"pod_id": pod.pod_id, "offset": offset, "text": text}


def test_chunks_are_read_back_in_order_and_a_chunk_that_arrives_twice_is_stored_once(pod):
    logs.store_chunks([chunk(pod, 6, "world\n"), chunk(pod, 0, "hello\n")])
    logs.store_chunks([chunk(pod, 0, "hello\n")])
    assert pod.log_chunks.count() == 2
    assert logs.read_all(pod) == "hello\nworld\n"


def test_logs_are_read_page_by_page_with_the_offset_of_the_next_page(pod):
    logs.store_chunks([chunk(pod, 0, "line 1\nline 2\n"), chunk(pod, 14, "line 3\n")])
    first = logs.read_logs(pod, 0, limit=7)
    assert (first.text, first.next_offset) == ("line 1\nline 2\n", 14)  # a chunk is never cut short
    second = logs.read_logs(pod, first.next_offset, limit=7)
    assert (second.text, second.lines, second.next_offset) == ("line 3\n", ["line 3"], 21)
    third = logs.read_logs(pod, second.next_offset)
    assert (third.text, third.next_offset) == ("", 21)


def test_reading_from_the_middle_of_a_chunk_and_across_chunks_cut_differently(pod):
    # A restarted agent re-ships the log from the start in one chunk.
    logs.store_chunks([chunk(pod, 0, "ab\n"), chunk(pod, 3, "cd\n"), chunk(pod, 0, "ab\ncd\nef\n")])
    assert logs.read_all(pod) == "ab\ncd\nef\n"
    assert logs.read_logs(pod, 4).text == "d\nef\n"


def test_reading_stops_at_a_part_that_has_not_arrived_yet(pod):
    logs.store_chunks([chunk(pod, 0, "one\n"), chunk(pod, 8, "three\n")])
    assert logs.read_all(pod) == "one\n"


def test_non_ascii_logs_keep_their_byte_offsets(pod):
    logs.store_chunks([chunk(pod, 0, "ééé\n"), chunk(pod, 7, "done\n")])
    assert logs.read_all(pod) == "ééé\ndone\n"


def test_chunks_of_unknown_pods_are_dropped(pod):
    assert logs.store_chunks([{"pod_id": "nope", "offset": 0, "text": "x"}]) == 0


def test_a_shorter_chunk_shipped_again_at_an_offset_never_shortens_the_stored_one(pod):
    logs.store_chunks([chunk(pod, 0, "ab\ncd\n")])
    logs.store_chunks([chunk(pod, 0, "ab\n"), chunk(pod, 0, "ab\ncd\nef\n"), chunk(pod, 0, "ab\ncd\n")])
    logs.store_chunks([chunk(pod, 0, "ab\n")])
    assert logs.read_all(pod) == "ab\ncd\nef\n"
    assert pod.log_chunks.count() == 1


def test_a_batch_is_stored_in_two_statements_however_many_chunks_it_holds(pod, make_pod, spec,
                                                                           django_assert_num_queries):
    # The pods' lookup and one insert: an agent ships the chunks of all its pods in one batch.
    others = [make_pod(Node.objects.create(name=f"n{i}", spec=spec)) for i in range(5)]
    first = [chunk(p, 0, "step 1\n") for p in [pod, *others]]
    with django_assert_num_queries(2):
        logs.store_chunks(first)
    again = [*first, *(chunk(p, 7, "step 2\n") for p in [pod, *others])]
    with django_assert_num_queries(2):
        assert logs.store_chunks(again) == 12
    assert [logs.read_all(p) for p in others] == ["step 1\nstep 2\n"] * 5
