#!/bin/sh
# Injection through output, RESULT keys and error text: comment ends, tags, table pipes, escapes.
if [ "$(cat /home/builder/source/attacks/mode)" != runtime ]; then
  echo 'RESULT {"injected": 0}'
  exit 0
fi
printf '\033]0;pwned\007\033[2J\033[31m--> <!-- <script>alert(1)</script> | cell\033[0m\n'
printf 'RESULT {"<script>alert(1)</script>|-->\\u001b[31m\\u001b]0;t\\u0007": 1}\n'
printf '\033[31m<script>alert(2)</script> --> | error text\n' >&2
exit 3
