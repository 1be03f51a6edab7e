"""transport"""

from orchestrator.deferred_invoke import defer_invoke

defer_invoke()  # before any module of this package imports Paramiko
