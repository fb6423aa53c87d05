"""Allow ``python -m vllm_frontend``."""

from vllm_frontend.cli import main

raise SystemExit(main())
