# gunicorn configuration for semula: `gunicorn -c deploy/gunicorn.conf.py`.
# The settings live in the package (semula/gunicorn_conf.py) so `semula serve` uses the same ones.
from semula.gunicorn_conf import *  # noqa: F401,F403
