"""The bottom-up-attention detector (Anderson et al. 2018): the R101-C4 Faster R-CNN with Visual Genome heads
(:mod:`.model`), its box operations (:mod:`.ops`), the converter of the public checkpoints' layouts
(:mod:`.weights`) and the extractor that runs it on image files (:mod:`.extractor`).
"""
