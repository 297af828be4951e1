#!/bin/sh
# A RESULT flood: 100,000 lines, far past runtime.max_results_per_script. The agent takes the
# first ones, drops the rest and says how many; the run goes on.
if [ "$(cat /home/builder/source/attacks/mode)" != intake ]; then
  echo 'RESULT {"results_flood": 1}'
  exit 0
fi
yes 'RESULT {"results_flood": 1}' | head -n 100000
