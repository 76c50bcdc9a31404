import sys
kind=sys.argv[1]; n=int(sys.argv[2]); out=open(sys.argv[3],'wb')
def cmd(*a):
    out.write(b'*%d\r\n'%len(a))
    for x in a:
        x=x if isinstance(x,bytes) else str(x).encode()
        out.write(b'$%d\r\n%s\r\n'%(len(x),x))
if kind=='begin': cmd('BEGIN','SI')
if kind in ('begin','multi'):
    if kind=='multi': cmd('MULTI')
    for i in range(n): cmd('SET',f'{kind}{n}:{i}','v')
    cmd('COMMIT' if kind=='begin' else 'EXEC')
if kind=='mset':
    a=['MSET']
    for i in range(n): a+= [f'ms{n}:{i}','v']
    cmd(*a)
if kind in ('exists','mget'):
    cmd(kind.upper(),*[f'ms{n}:{i}' for i in range(n)])
