#!/bin/sh
# keepalived notify script for pairwalld in [failover] driver = "keepalived".
#
# keepalived runs it as:  pairwall-notify.sh [-s SOCKET] [-c PAIRWALLCTL] TYPE NAME STATE PRIORITY
# (TYPE is INSTANCE or GROUP; STATE is MASTER, BACKUP, FAULT, STOP or DELETED) and we pass the role
# on: pairwallctl failover set-role master|backup|fault. STOP / DELETED mean keepalived no longer
# runs the instance and has removed the VIPs: this node is not master any more, so "backup".
#
#   -s SOCKET       pairwalld's control socket (default: pairwallctl's own default)
#   -c PAIRWALLCTL  the pairwallctl command (default: pairwallctl from PATH)
#
# A failure is retried briefly (pairwalld may be restarting) and then logged: keepalived does not
# look at a notify script's exit status, so the log is the only trace.
set -u

ctl=pairwallctl
sock=
while getopts "s:c:" opt; do
  case "$opt" in
    s) sock=$OPTARG ;;
    c) ctl=$OPTARG ;;
    *) echo "usage: $0 [-s SOCKET] [-c PAIRWALLCTL] TYPE NAME STATE PRIORITY" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))

if [ $# -lt 3 ]; then
  echo "usage: $0 [-s SOCKET] [-c PAIRWALLCTL] TYPE NAME STATE PRIORITY" >&2
  exit 2
fi
name=$2
state=$3

case "$state" in
  MASTER) role=master ;;
  BACKUP | STOP | DELETED) role=backup ;;
  FAULT) role=fault ;;
  *)
    logger -t pairwall-notify "keepalived instance $name: unknown state '$state', pairwalld not told"
    exit 2
    ;;
esac

tries=0
while :; do
  if [ -n "$sock" ]; then
    out=$($ctl -s "$sock" failover set-role "$role" 2>&1) && exit 0
  else
    out=$($ctl failover set-role "$role" 2>&1) && exit 0
  fi
  tries=$((tries + 1))
  if [ "$tries" -ge 5 ]; then
    logger -t pairwall-notify "keepalived instance $name is $state but pairwalld was not told: $out"
    exit 1
  fi
  sleep 0.2
done
