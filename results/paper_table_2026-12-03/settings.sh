export OUT=runs/paper PARALLEL=1 THREADS=1
export FINETUNES="ar|ar|
refusion|refusion|
refusion-aux8f7|refusion|--aux-ar 8 --mask-floor 0.3 --slot-sizes 4,8,16 --lr 7e-4
mdm|mdm|--mdm-pad GEN"
ROLLING="--rolling --slot-size 4 --slot-threshold 0.5"
ROLLING8="--rolling --slot-size 8 --slot-threshold 0.5"
VERIFIED="--slot-size 8 --blocks 16 --slot-threshold 0.5 --token-threshold 0.5 --ar-verify both"
export EVALS="ar|ar|ar|
ar-base|base|ar|
refusion-0.9-0.4|refusion|refusion|--slot-size 8 --blocks 2 --slot-threshold 0.9 --token-threshold 0.4
refusion-0.7-0.2|refusion|refusion|--slot-size 8 --blocks 2 --slot-threshold 0.7 --token-threshold 0.2
head-ar|refusion-aux8f7|ar|
head-0.9-0.4|refusion-aux8f7|refusion|--slot-size 8 --blocks 2 --slot-threshold 0.9 --token-threshold 0.4
head-0.7-0.2|refusion-aux8f7|refusion|--slot-size 8 --blocks 2 --slot-threshold 0.7 --token-threshold 0.2
head-correct|refusion-aux8f7|refusion|--slot-size 8 --blocks 16 --slot-threshold 0.5 --token-threshold 0.5 --ar-verify correct
head-verified|refusion-aux8f7|refusion|$VERIFIED
head-fast|refusion-aux8f7|refusion|$VERIFIED --jacobi
head-rolling|refusion-aux8f7|refusion|$ROLLING
head-rolling-s8|refusion-aux8f7|refusion|$ROLLING8
mdm-128-steps|mdm|mdm|--blocks 4 --steps 128
mdm-32-steps|mdm|mdm|--blocks 4 --steps 32"
