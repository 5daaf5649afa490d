# system_info: one section per source, each "== NAME" then the file or command output as it is.
section() { printf '== %s\n' "$1"; }
section hostname; cat /proc/sys/kernel/hostname
section kernel; uname -r
section arch; uname -m
section uptime; cat /proc/uptime
section loadavg; cat /proc/loadavg
section ncpu; getconf _NPROCESSORS_ONLN 2>/dev/null || nproc
section meminfo; cat /proc/meminfo
section boot_id; cat /proc/sys/kernel/random/boot_id
for f in /etc/os-release /usr/lib/os-release; do # os-release(5): the second where the first is missing
  [ -r "$f" ] || continue
  section os_release_file; echo "$f"
  section os_release; cat "$f"
  break
done
section end
