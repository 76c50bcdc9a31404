module elsa/tests/linearizability/porcupine

go 1.21

require github.com/anishathalye/porcupine v1.3.1
