# gpu_info. Output: "G missing" (no nvidia-smi on PATH), or "G ok", nvidia-smi's CSV records, "R <its exit status>".
command -v nvidia-smi >/dev/null 2>&1 || { echo 'G missing'; exit 0; }
echo 'G ok'
nvidia-smi --query-gpu=index,name,uuid,memory.total,memory.used,utilization.gpu,temperature.gpu,driver_version \
  --format=csv,noheader,nounits
echo "R $?"
