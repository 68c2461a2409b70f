#!/bin/sh
cd "$(dirname "$0")"
for mix in A_inhorizon_grants B_inhorizon_dup_resend_grants C_late_dup_resend_grants D_late_dup_noresend_grants E_late_dup_resend_nogrants F_lateness5s_grants_resend G_inhorizon_resend_heavy; do
  python3 diff.py $mix $(seq 1 30) > results_$mix.jsonl 2> err_$mix.log
done
echo ALLDONE
