"""An OpenAI-compatible HTTP server on trio (``xinfer-async serve``).

``OpenAIServer`` is the ASGI app (``_app``), mapping OpenAI requests onto ``LanguageModel.generate``
(``_schema``), with Prometheus metrics (``_metrics``); ``run_server`` serves it with hypercorn's
trio worker in the caller's ``trio.run`` (``_command``, which also holds the command line).
"""

from ._app import OpenAIServer as OpenAIServer, ServerLimits as ServerLimits
from ._command import build_parser as build_parser, hypercorn_config as hypercorn_config, main as main, \
    run_server as run_server
from ._schema import APIError as APIError
