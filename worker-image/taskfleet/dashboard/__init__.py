"""``taskfleet dashboard``: queues, tasks and workers in a browser (docs/dashboard.md).

Server-rendered pages (Starlette, Jinja2, served by uvicorn; the ``dashboard`` extra),
on the producer's reads. Every page view is a few pipelined commands of bounded cost
whatever the queue holds: sizes, one page of a state's sorted set by rank, one task's
hash; never a scan. Read-only unless started with actions and a token: then retry,
promote, cancel and purge through the queue's own calls, for a logged-in session.

- ``settings``: what the command was given (``DashboardSettings``);
- ``reads``: the pages' reads: a page of a state, a task, the workers with what they hold;
- ``sampler``: the queues' counters sampled in the background, for the rate charts, and
  the queues of the Redis (found in the background, never by a page view);
- ``charts``: samples -> a small inline SVG chart: pure;
- ``display``: ages, times, JSON capped for display: pure;
- ``auth``: the token, the sessions, the CSRF and same-origin checks;
- ``providers``: provider quotas' use and pauses, and the queues waiting on a paused one;
- ``output``: a task's output, whole once finished, live (server-sent events) while it runs;
- ``actions``: an action parsed, run through ``Queue``'s calls, logged;
- ``acting``: the POST routes (login, logout, an action confirmed then done);
- ``app``: the routes, the templates, the security headers (``create_app``); ``serve``
  runs it. Starlette and Jinja2 load with this module only.

Imports the protocol and the producer only; the CLI imports it inside the command.
"""

from __future__ import annotations

from taskfleet.dashboard.settings import DashboardSettings

__all__ = ["DashboardSettings"]
