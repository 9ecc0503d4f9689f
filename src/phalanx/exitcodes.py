"""Exit codes with a meaning between a worker and the platform."""

# A rank that received a preemption notice, saved what it needed and left on
# purpose. 143 is what a shell reports for a process ended by SIGTERM, so a
# script that just dies of the signal reads the same way.
PREEMPTED_EXIT_CODE = 143
