# shellcheck shell=bash
# layout_tar DIR OUT EPOCH: the OCI image layout in DIR as the tar OUT with
# nothing of this machine in it: names in order, one time (EPOCH),
# root-owned, 0644 files and 0755 folders; so the same layout gives the
# same bytes. Written beside OUT, then renamed into place.
layout_tar() {
  local dir="$1" out="$2" epoch="$3"
  mkdir -p "$(dirname "$out")"
  tar --create --file "$out.tmp" --directory "$dir" --format=ustar --sort=name \
    --mtime="@$epoch" --owner=0 --group=0 --numeric-owner --mode=a=r,u+w,a+X \
    oci-layout index.json blobs
  mv "$out.tmp" "$out"
}
