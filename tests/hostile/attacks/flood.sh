#!/bin/sh
# An output flood: 64 MiB on stdout, some with escape sequences.
[ "$(cat attacks/mode)" = runtime ] || exit 0
printf '\033[41mflood start\033[0m\n'
yes 'yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy' | head -c 67108864
printf '\033[41mflood end\033[0m\n'
