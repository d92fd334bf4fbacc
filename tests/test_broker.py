import os

import pytest
from django.conf import settings
from kombu.exceptions import ChannelError

from console.celery import app

pytestmark = pytest.mark.skipif(bool(settings.REDIS_URL), reason="the embedded filesystem broker only")


def test_a_message_file_appears_under_its_queue_name_only_once_it_is_complete(monkeypatch, tmp_path):
    with app.connection() as connection:
        channel = connection.default_channel
        monkeypatch.setattr(channel, "data_folder_out", str(tmp_path))

        def crash(src, dst):
            assert open(src, "rb").read().startswith(b"{")  # fully written before the rename
            raise OSError("disk gone")

        monkeypatch.setattr(os, "replace", crash)
        with pytest.raises(ChannelError):
            channel._put("default", {"body": "x"})
    # A consumer matches "<...>.<queue>.msg": it never saw a name for the unfinished message.
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".msg")]
