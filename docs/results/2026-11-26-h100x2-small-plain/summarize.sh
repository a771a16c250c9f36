#!/bin/bash
# per file: ours-raw (device us) median over rows 16B-64KB per op, and 1MB; raw and ours typical
for f in "$@"; do
  grep -E "/(raw|raw_end|raw_fork|ours) " $f | sed 's/\[rank 0\]: //' | awk -v F=$(basename $f) '
  {split($1,a,"/"); key=a[1]" "$3; v[key,a[2]]=$5; h[key,a[2]]=$9;
   if(a[2]=="ours"){d=$5-v[key,"raw"]; e=$5-v[key,"raw_end"]; if($3<=65536 && $3>=16){s[a[1]]+=d; n[a[1]]++; se[a[1]]+=e; r[a[1]]+=v[key,"raw"]; if(d>mx[a[1]])mx[a[1]]=d} if($3==1048576) big[a[1]]=d}}
  END{for(o in s) printf "%-12s %-15s raw %5.2f  ours-raw mean %+5.2f max %+5.2f  ours-raw_end %+5.2f  1MB %+5.2f\n", F, o, r[o]/n[o], s[o]/n[o], mx[o], se[o]/n[o], big[o]}'
done
