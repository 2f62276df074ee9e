#!/bin/sh
# keepalived notify script for pairwalld in [failover] driver = "keepalived": passes the role
# keepalived decided on to pairwalld (pairwallctl failover set-role master|backup|fault).
#
# Two ways keepalived can run it:
#   pairwall-notify.sh [-i INSTANCE | -g GROUP] [-s SOCKET] [-c PAIRWALLCTL] [-t FILE] FIFO
#       as vrrp_notify_fifo_script (the shipped keepalived.conf): keepalived writes one line per
#       state change, "INSTANCE "NAME" STATE PRIORITY", into FIFO, and we apply them one after the
#       other. This is the way to use: keepalived forks a separate notify script per event, so two
#       quick changes (BACKUP -> MASTER -> BACKUP) can reach pairwalld in the wrong order; the FIFO
#       keeps them in order.
#   pairwall-notify.sh [-i INSTANCE | -g GROUP] [-s SOCKET] [-c PAIRWALLCTL] TYPE NAME STATE PRIORITY
#       as a per-instance `notify` script.
# STATE is MASTER, BACKUP, FAULT, STOP or DELETED. STOP / DELETED mean keepalived no longer runs the
# instance and has removed its VIPs: this node is not master any more, so "backup". The FIFO also
# carries MASTER_RX_LOWER_PRI, MASTER_PRIORITY and BACKUP_PRIORITY, which leave the role as it is.
#
#   -i INSTANCE     the vrrp_instance whose state is pairwalld's role. keepalived writes the changes
#                   of every instance and sync group into the FIFO: those of other instances, and
#                   of groups, leave the role alone (logged once per name, so that a misspelt -i
#                   shows). Without -i every instance's change counts, which is right only for a
#                   keepalived that runs this one instance.
#   -g GROUP        the vrrp_sync_group whose state is pairwalld's role, where the firewall's VIPs
#                   are instances of one sync group (one per link, as a firewall pair's usually
#                   are): the group's state is the one that holds all of them. Its instances' lines
#                   leave the role alone (keepalived's later sources leave out an instance's line
#                   when the group made the change, vrrp_notify.c send_instance_notifies; 2.2.7
#                   writes both).
#   -s SOCKET       pairwalld's control socket (default: pairwallctl's own default)
#   -c PAIRWALLCTL  the pairwallctl command (default: pairwallctl from PATH)
#   -t FILE         for as long as this script runs (FIFO mode only), keep FILE holding pairwalld's
#                   demotion, or 254 while pairwalld does not answer (pairwallctl failover
#                   track-file, asked every 100 ms), for keepalived's track_file: keepalived hears
#                   of a pairwalld gone, or demoted, within a tenth of a second, where the health
#                   script would tell it at its next run, up to a second later.
#
# A failure is retried for about five seconds, each try given 2 s to be answered (pairwalld may be
# restarting or busy), and then logged to syslog and stderr: keepalived does not look at the exit
# status, so the log is the only trace of a role pairwalld was never told.
set -u

usage="usage: $0 [-i INSTANCE | -g GROUP] [-s SOCKET] [-c PAIRWALLCTL] [-t FILE] FIFO | TYPE NAME STATE PRIORITY"
# wrong WHAT: keepalived sends its scripts' output to /dev/null, so a wrong invocation goes to
# syslog too, or the role would silently never reach pairwalld.
wrong() {
  logger -t pairwall-notify "$1; $usage" 2>/dev/null
  echo "pairwall-notify: $1" >&2
  echo "$usage" >&2
  exit 2
}

ctl=pairwallctl
sock=
instance=
group=
track=
ignored=" "
while getopts "i:g:s:c:t:" opt; do
  case "$opt" in
    i) instance=$OPTARG ;;
    g) group=$OPTARG ;;
    s) sock=$OPTARG ;;
    c) ctl=$OPTARG ;;
    t) track=$OPTARG ;;
    *) wrong "unknown option" ;;
  esac
done
shift $((OPTIND - 1))
[ -n "$instance" ] && [ -n "$group" ] && wrong "-i and -g exclude each other (pairwalld follows one)"

# ours TYPE NAME: whether a change of keepalived's TYPE ("INSTANCE" or "GROUP") NAME is pairwalld's.
ours() {
  if [ -n "$group" ]; then
    [ "$1" = GROUP ] && [ "$2" = "$group" ] && return 0
    [ "$1" = GROUP ] || return 1  # the group's instances follow it
    followed="is not group $group (-g)"
  else
    [ "$1" = INSTANCE ] && { [ -z "$instance" ] || [ "$2" = "$instance" ]; } && return 0
    followed="is not followed"
    [ -n "$instance" ] && followed="is not instance $instance (-i)"
  fi
  # Once per name, so that a misspelt -i or -g shows.
  case "$ignored" in
    *" $1:$2 "*) ;;
    *)
      ignored="$ignored$1:$2 "
      hint=
      [ "$1" = GROUP ] && [ -z "$group" ] &&
        hint="; if pairwalld's VIPs are instances of this sync group, follow the group (-g $2)"
      logger -t pairwall-notify "keepalived $1 $2 $followed: its changes are not passed on$hint" 2>/dev/null
      ;;
  esac
  return 1
}

# tell TYPE NAME STATE: one state change of keepalived's instance or sync group NAME.
tell() {
  what="instance $2"
  [ "$1" = GROUP ] && what="sync group $2"
  case "$3" in
    MASTER) role=master ;;
    BACKUP | STOP | DELETED) role=backup ;;
    FAULT) role=fault ;;
    # Events within a state, not changes of it: a master hearing a lower priority (keepalived
    # writes one per advertisement heard, ten a second at advert_int 0.1, for as long as a one-way
    # partition lasts) and priority changes from the tracked scripts. The role stands.
    MASTER_RX_LOWER_PRI | MASTER_PRIORITY | BACKUP_PRIORITY) return 0 ;;
    *)
      logger -t pairwall-notify "keepalived $what: unknown state '$3', pairwalld not told"
      return 2
      ;;
  esac
  # Each try is bounded: pairwallctl waits up to 30 s for an answer (and without end for a
  # connection to a daemon whose listen queue is full), so a frozen pairwalld would hold the changes
  # queued behind this one for minutes, and keepalived drops what no longer fits in the FIFO. KILL,
  # since the FIFO loop ignores TERM and pairwallctl inherits that.
  give_up=$(($(date +%s) + 5))
  while :; do
    if [ -n "$sock" ]; then
      out=$(timeout -s KILL 2 $ctl -s "$sock" failover set-role "$role" 2>&1) && return 0
    else
      out=$(timeout -s KILL 2 $ctl failover set-role "$role" 2>&1) && return 0
    fi
    case $? in 124 | 137) out="no answer within 2 s" ;; esac
    if [ "$(date +%s)" -ge "$give_up" ]; then
      msg="keepalived $what is $3 but pairwalld was not told: $out"
      logger -t pairwall-notify "$msg" 2>/dev/null
      echo "pairwall-notify: $msg" >&2
      return 1
    fi
    sleep 0.2
  done
}

if [ $# -eq 1 ] && [ -p "$1" ]; then
  # A keepalived stopping sends its scripts SIGTERM first and writes the instances' STOP lines
  # after (vrrp_terminate_phase1): dying on the signal, we would never tell pairwalld that this
  # node is no longer master. Ignored, the FIFO's end or the STOP ends the script instead (a reload
  # sends SIGTERM too, and then closes the FIFO, without a STOP). Nothing follows a STOP, and
  # keepalived kills a script still running a second later: we exit as soon as it is passed on.
  trap '' TERM
  if [ -n "$track" ]; then
    # Killed with this script, by pairwallctl itself if this script is killed (its parent-death
    # signal), and here at every exit: with KILL, as it inherits the TERM ignored above.
    if [ -n "$sock" ]; then
      $ctl -s "$sock" failover track-file "$track" &
    else
      $ctl failover track-file "$track" &
    fi
    tracker=$!
    trap 'kill -KILL "$tracker" 2>/dev/null' EXIT
  fi
  while read -r type name state _priority; do
    [ "$type" = INSTANCE ] || [ "$type" = GROUP ] || continue
    name=$(echo "$name" | tr -d '"')
    ours "$type" "$name" || continue
    tell "$type" "$name" "$state"
    [ "$state" = STOP ] && exit 0
  done <"$1"
  exit 0
fi

[ -n "$track" ] && wrong "-t goes with a FIFO (vrrp_notify_fifo_script)"
case $# in
  0) wrong "called with no arguments (notify_master and its kind pass none: use notify or vrrp_notify_fifo_script)" ;;
  1) wrong "$1 is not a FIFO" ;;
  2) wrong "called with 2 arguments ($*)" ;;
esac
ours "$1" "$2" || exit 0
tell "$1" "$2" "$3"
