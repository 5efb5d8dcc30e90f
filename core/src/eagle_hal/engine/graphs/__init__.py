"""Device graphs of the engine's forwards: ``runner`` (which work replays, per bucket),
``forward`` (one captured forward), ``draft_loop`` (the draft's loop of any tree shape) and
``iteration`` (an overlapped iteration's verify, accept and extend)."""
