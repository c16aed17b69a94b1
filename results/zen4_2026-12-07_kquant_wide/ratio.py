import sys, statistics, collections
# lines: side dtype n ms pct ; runs in A B B A order per round; each run prints all (dtype, n)
rows=[l.split() for l in open(sys.argv[1]) if l.strip() and not l.startswith('#')]
runs=[]; cur=None
for r in rows:
    side,dt,n,ms=r[0],r[1],int(r[2]),float(r[3])
    if cur is None or cur[0]!=side or (dt,n) in cur[1]:
        cur=(side,{}); runs.append(cur)
    cur[1][(dt,n)]=ms
rounds=[runs[i:i+4] for i in range(0,len(runs),4)]
keys=sorted(runs[0][1].keys())
print("%-7s %3s  %-22s %-22s %s"%("dtype","n","A ms (min-max)","B ms (min-max)","B/A per round: median [min, max] (rounds)"))
for k in keys:
    ra=[]; A=[];B=[]
    for rd in rounds:
        a=[x[1][k] for x in rd if x[0]=='A']; b=[x[1][k] for x in rd if x[0]=='B']
        A+=a;B+=b; ra.append(sum(b)/sum(a))
    print("%-7s %3d  %-22s %-22s %.3f [%.3f, %.3f] (%d)"%(k[0],k[1],"%.3f-%.3f"%(min(A),max(A)),"%.3f-%.3f"%(min(B),max(B)),statistics.median(ra),min(ra),max(ra),len(ra)))
