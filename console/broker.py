"""kombu's filesystem transport with atomic message writes (the embedded mode's broker).

kombu creates a message file under its final name and then writes it, so a consumer polling the
folder can take the file while it is still empty; the JSONDecodeError that follows stops the
worker. Here a message is written under a name no consumer matches and renamed into place.
"""

import os
import uuid
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"  # kombu's own naming
        final = os.path.join(self.data_folder_out, name)
        partial = os.path.join(self.data_folder_out, f"partial-{uuid.uuid4()}.part")
        try:
            with open(partial, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)  # atomic within one folder
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel
