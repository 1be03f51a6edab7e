"""`StreamingTransport`: Paramiko's Transport with two settings that decide its CPU cost per connection
once connections stay open and carry a steady trickle of packets (the dashboard: one agent stream per
host, 128 hosts and more, a packet a second each).

- AES-GCM first in the cipher offer (then Paramiko's usual order, so a server without it still
  connects): an AEAD cipher decrypts and authenticates each packet in one call into `cryptography`,
  where the CTR ciphers add an HMAC and Paramiko's pure-Python constant-time MAC comparison (a loop
  over the MAC's bytes) per packet. Measured at 128 hosts: the reader threads' CPU halved with the
  change below.
- The reader thread wakes once a second, not ten times, when nothing arrives: it blocks in recv with
  the socket timeout only to notice a close or to send a keepalive (every `keepalive` s, 15 by
  default), and `Transport.close()` does not wait for it (Paramiko's stop_thread returns once the
  packetizer is closed), so only the idle thread's exit is later, by at most a second.
"""

from __future__ import annotations

import paramiko

READER_WAKE_S = 1.0  # Paramiko's default: 0.1


def _gcm_first(ciphers: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(c for c in ciphers if "-gcm@" in c) + tuple(c for c in ciphers if "-gcm@" not in c)


class StreamingTransport(paramiko.Transport):
    _preferred_ciphers = _gcm_first(paramiko.Transport._preferred_ciphers)  # type: ignore[attr-defined]  # (no stub)
    _active_check_timeout = READER_WAKE_S
