# Reads dev/ab_device.sh's bench lines ("VERSION family/row  launch  us/call ...") and prints
# the minimum us/call of each (row, version) over the rounds, a column a version.
{
  n = split($0, f, /  +/); if (n < 3) next
  v = f[1]; sub(/ .*/, "", v); row = f[1]; sub(/^[^ ]+ [^ ]+\//, "", row)
  if (!(v in seen)) { seen[v] = 1; vs[++nv] = v }
  if (!(row in rseen)) { rseen[row] = 1; rows[++nr] = row }
  k = row SUBSEP v
  if (!(k in best) || f[3] + 0 < best[k]) best[k] = f[3] + 0
}
END {
  printf "%-66s", "minimum us/call over the rounds"; for (i = 1; i <= nv; i++) printf "%10s", vs[i]; print ""
  for (r = 1; r <= nr; r++) {
    printf "%-66s", substr(rows[r], 1, 66)
    for (i = 1; i <= nv; i++) {
      k = rows[r] SUBSEP vs[i]
      if (k in best) printf "%10.2f", best[k]; else printf "%10s", "-"
    }
    print ""
  }
}
