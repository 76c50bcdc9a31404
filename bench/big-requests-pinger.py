import redis, sys, time, signal
r=redis.Redis(port=int(sys.argv[1])); worst=0.0
def done(*a):
    print(f"{worst*1000:.0f}"); sys.stdout.flush(); sys.exit(0)
signal.signal(signal.SIGTERM, done)
while True:
    t=time.perf_counter(); r.ping(); worst=max(worst,time.perf_counter()-t); time.sleep(0.002)
