package redis_test

import goredis "github.com/redis/go-redis/v9"

func goredisZ(score float64, member string) goredis.Z { return goredis.Z{Score: score, Member: member} }
