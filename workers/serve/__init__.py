"""``memledger serve``: the HTTP API process (``runtime``), the embedded default's
background projections (``projector``), and the CLI's way through it while it owns a
data directory (``files``, ``forward`` on the CLI's side, ``operator`` and ``capture``
on serve's). Nothing is imported here: the CLI's forwarding check stays light."""
