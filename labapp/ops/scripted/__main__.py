"""``python -m labapp.ops.scripted --port 8100 --ttft-ms 50 --itl-ms 10``"""

from labapp.ops.scripted.run import main

main()
