package main

import _ "github.com/redis/go-redis/v9"

func main() {}
