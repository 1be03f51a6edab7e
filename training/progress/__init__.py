"""Progress from a user program's own log: recognised lines (`lines`), followed files (`follow`) and the
supervisor's tailer that turns them into progress events (`tailer`). Stdlib only."""
