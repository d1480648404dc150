# bench/common.sh: helpers the bench scripts share (sourced; defines functions only).
#   free_port        a free loopback TCP port
#   field LABEL KEY  KEY's value on the line LABEL of $RESULTS ("LABEL<TAB>k=v k=v ..."; a
#                    trailing % dropped)
#   ratio A B        A / B to two decimals, n/a when either is missing or B is 0

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

field() {
    awk -F'\t' -v l="$1" -v k="$2" '$1 == l { n = split($2, f, " "); for (i = 1; i <= n; i++) { split(f[i], kv, "="); if (kv[1] == k) v = kv[2] } } END { sub(/%$/, "", v); print v }' "$RESULTS"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "n/a"; else printf "%.2f", a / b }'; }
